package main

import "testing"

func TestGreeting(t *testing.T) {
	if text, ok := greeting("Ada"); !ok || text != "Hello, Ada!" {
		t.Fatalf("got %q %v", text, ok)
	}
	if _, ok := greeting(" "); ok {
		t.Fatal("a blank name has no greeting")
	}
}
