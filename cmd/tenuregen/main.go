package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tenureq/tenure/cmd/tenuregen/internal/gen"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the command without the process: it returns the exit code (0 ok, 1 failure or stale
// file under -check, 2 usage).
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenuregen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".", "package `directory` to read and write")
	out := fs.String("out", gen.DefaultOut, "generated file `name`, relative to -dir")
	check := fs.Bool("check", false, "write nothing; exit 1 if the generated file is missing or differs from what would be generated")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tenuregen [-dir DIR] [-out FILE] [-check]\n\n"+
			"Generates Kind, PayloadVersion, Validate, typed enqueue helpers and handler registration\n"+
			"for the //tenure:job types of a package. Add it to your module as a tool once:\n\n"+
			"\tgo get -tool github.com/tenureq/tenure/cmd/tenuregen\n\n"+
			"then run it from a //go:generate line in the package:\n\n"+
			"\t//go:generate go tool tenuregen\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tenuregen: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	if *out == "" || filepath.Base(*out) != *out {
		fmt.Fprintf(stderr, "tenuregen: -out must be a file name inside -dir, got %q\n", *out)
		return 2
	}
	src, err := gen.Generate(gen.Options{Dir: *dir, Out: *out})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	path := filepath.Join(*dir, *out)
	old, readErr := os.ReadFile(path)
	if *check {
		switch {
		case readErr != nil:
			fmt.Fprintf(stderr, "tenuregen: %s is missing: run go generate and commit it\n", path)
			return 1
		case !bytes.Equal(old, src):
			fmt.Fprintf(stderr, "tenuregen: %s is stale (first difference at line %d): run go generate and commit it\n", path, firstDiffLine(old, src))
			return 1
		}
		return 0
	}
	if readErr == nil && bytes.Equal(old, src) {
		return 0 // unchanged: keep the file's modification time
	}
	if err := os.WriteFile(path, src, 0o644); err != nil {
		fmt.Fprintf(stderr, "tenuregen: %v\n", err)
		return 1
	}
	return 0
}

func firstDiffLine(a, b []byte) int {
	line := 1
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return line
		}
		if a[i] == '\n' {
			line++
		}
	}
	return line
}
