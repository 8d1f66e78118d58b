// Command lambdazip writes a Lambda deployment package: a zip holding one file, bootstrap,
// executable and with a fixed time, so the same binary always makes the same zip (and
// CloudFormation sees no change where there is none). `make lambda` runs it; no zip tool needed.
//
//	go run ./scripts/lambdazip OUT.zip BOOTSTRAP
package main

import (
	"archive/zip"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: lambdazip OUT.zip BOOTSTRAP")
		os.Exit(2)
	}
	if err := write(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "lambdazip:", err)
		os.Exit(1)
	}
}

func write(out, bootstrap string) error {
	in, err := os.Open(bootstrap)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate, Modified: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err == nil {
		_, err = io.Copy(w, in)
	}
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
