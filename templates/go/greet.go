package main

import "strings"

// greeting is the step's logic, free of weft, so `go test` can test it: the
// greeting for name, or false when there is no name.
func greeting(name string) (string, bool) {
	if strings.TrimSpace(name) == "" {
		return "", false
	}
	return "Hello, " + name + "!", true
}
