// `slug`: a weft step in Go, a plain WASI command (GOOS=wasip1). It reads
// its input on stdin and writes its output to stdout through the helper
// in guest-sdk/go; `weft plugin build` builds it and records plugin.json
// in it. Test its logic with `go test ./...`.
package main

import (
	"strings"
	"unicode"

	"weft"
)

type input struct {
	Title string `json:"title"`
}

type output struct {
	Slug  string `json:"slug"`
	Words int    `json:"words"`
}

func main() {
	weft.Run(func(in input) (output, error) {
		slug, words := slugify(in.Title)
		if words == 0 {
			return output{}, weft.Fatal("empty_title", "the title has no letters or digits")
		}
		weft.Log("%d words", words)
		return output{Slug: slug, Words: words}, nil
	})
}

// slugify lower-cases the title's words (runs of letters and digits) and
// joins them with dashes.
func slugify(title string) (string, int) {
	words := strings.FieldsFunc(strings.ToLower(title), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	return strings.Join(words, "-"), len(words)
}
