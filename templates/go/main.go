// `{{name}}`: a weft step in Go, a WASI command. Build it with `weft plugin
// build` (its name, version and schemas come from plugin.json), test its
// logic with `go test ./...`.
package main

import "{{name}}/weft"

type input struct {
	Name string `json:"name"`
}

type output struct {
	Greeting string `json:"greeting"`
}

func main() {
	weft.Run(func(in input) (output, error) {
		text, ok := greeting(in.Name)
		if !ok {
			return output{}, weft.Fatal("empty_name", "name must not be empty")
		}
		weft.Log("%s", text)
		return output{Greeting: text}, nil
	})
}
