// Package weft runs a Go program as a weft step. The program is a plain
// WASI command (GOOS=wasip1, wrapped by `weft plugin build`): its input is
// the JSON on stdin, its output the JSON it writes to stdout, its log what
// it writes to stderr. A step's error is written to stdout as
// {"error": {...}}, and the program exits 75 (retryable) or 1 (fatal).
//
// A command step has no key-value space, outbox or secrets: those are
// imports of the weft:plugin contract, which Go cannot export today.
// `weft plugin new NAME --lang go` copies this file into the project.
package weft

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ExitRetryable is the exit status of a retryable failure (EX_TEMPFAIL).
const ExitRetryable = 75

// Error is a step's own error: its code, its message, whether another
// attempt may succeed, and details (any JSON value) for the run's record.
type Error struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Details   any    `json:"details,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Fatal is an error another attempt would repeat: the step is not retried.
func Fatal(code, message string) *Error { return &Error{Code: code, Message: message} }

// Retryable is an error another attempt may not meet: the step's retry
// policy applies.
func Retryable(code, message string) *Error {
	return &Error{Code: code, Message: message, Retryable: true}
}

// Log writes one line to the step's log (stderr).
func Log(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// Run reads the input into In, calls step, writes its output or its error,
// and exits. An error that is not an *Error is fatal, with code "error".
func Run[In, Out any](step func(In) (Out, error)) {
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, step))
}

func run[In, Out any](stdin io.Reader, stdout, stderr io.Writer, step func(In) (Out, error)) int {
	var in In
	data, err := io.ReadAll(stdin)
	if err == nil {
		err = json.Unmarshal(data, &in)
	}
	if err != nil {
		return fail(stdout, stderr, Fatal("invalid_input", "the input does not decode: "+err.Error()))
	}
	out, err := step(in)
	if err != nil {
		var typed *Error
		if !errors.As(err, &typed) {
			typed = Fatal("error", err.Error())
		}
		return fail(stdout, stderr, typed)
	}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		fmt.Fprintf(stderr, "the output does not encode: %v\n", err)
		return 1
	}
	return 0
}

func fail(stdout, stderr io.Writer, e *Error) int {
	fmt.Fprintln(stderr, e.Error())
	if err := json.NewEncoder(stdout).Encode(map[string]*Error{"error": e}); err != nil {
		fmt.Fprintf(stderr, "the error does not encode: %v\n", err)
	}
	if e.Retryable {
		return ExitRetryable
	}
	return 1
}
