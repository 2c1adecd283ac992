package main

import "testing"

func TestSlugify(t *testing.T) {
	for _, c := range []struct {
		title string
		slug  string
		words int
	}{
		{"Hello, Durable World!", "hello-durable-world", 3},
		{"  Ünïcode  2026 ", "ünïcode-2026", 2},
		{"?!", "", 0},
	} {
		slug, words := slugify(c.title)
		if slug != c.slug || words != c.words {
			t.Errorf("slugify(%q) = %q, %d; want %q, %d", c.title, slug, words, c.slug, c.words)
		}
	}
}
