module slug

go 1.24

require weft v0.0.0

// The helper, from this repository (a project made by `weft plugin new
// --lang go` carries its own copy instead).
replace weft => ../../guest-sdk/go
