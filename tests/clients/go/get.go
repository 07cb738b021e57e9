// get.go -- a Go client with no timeouts at all (net/http's default
// client): GET each URL, print the status or the error; exit 1 on an error.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	rc := 0
	for _, u := range os.Args[1:] {
		t0 := time.Now()
		r, err := http.Get(u)
		if err != nil {
			fmt.Printf("error %v %.0fms\n", err, float64(time.Since(t0).Microseconds())/1000)
			rc = 1
			continue
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		fmt.Printf("status %d %.0fms\n", r.StatusCode, float64(time.Since(t0).Microseconds())/1000)
	}
	os.Exit(rc)
}
