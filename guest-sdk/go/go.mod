module weft

go 1.24
