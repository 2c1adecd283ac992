package weft

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type in struct {
	Name string `json:"name"`
}

func call(input string, step func(in) (map[string]string, error)) (int, map[string]any) {
	var stdout, stderr bytes.Buffer
	status := run(strings.NewReader(input), &stdout, &stderr, step)
	var written map[string]any
	_ = json.Unmarshal(stdout.Bytes(), &written)
	return status, written
}

func TestOutputErrorsAndBadInput(t *testing.T) {
	greet := func(i in) (map[string]string, error) {
		switch i.Name {
		case "":
			return nil, Fatal("empty_name", "name must not be empty")
		case "busy":
			return nil, Retryable("busy", "try later")
		case "plain":
			return nil, errors.New("plain error")
		}
		return map[string]string{"greeting": "Hello, " + i.Name + "!"}, nil
	}
	if status, out := call(`{"name":"Ada"}`, greet); status != 0 || out["greeting"] != "Hello, Ada!" {
		t.Fatalf("ok: %d %v", status, out)
	}
	cases := []struct {
		input, code string
		status      int
	}{
		{`{"name":""}`, "empty_name", 1},
		{`{"name":"busy"}`, "busy", ExitRetryable},
		{`{"name":"plain"}`, "error", 1},
		{`not json`, "invalid_input", 1},
	}
	for _, c := range cases {
		status, out := call(c.input, greet)
		e, _ := out["error"].(map[string]any)
		if status != c.status || e["code"] != c.code {
			t.Errorf("%s: %d %v", c.input, status, out)
		}
	}
}
