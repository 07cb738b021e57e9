// get.go -- a Go client with no timeouts at all (net/http's default
// client): GET each URL, print the status or the error; exit 1 on an error.
// Its main goroutine keeps the main thread, so that its connects come from
// another thread, as a busy Go program's do (the seccomp engine is told the
// thread, and must name the process). With GET_PID_FILE set it writes its
// pid there.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"time"
)

func main() {
	runtime.LockOSThread()
	if f := os.Getenv("GET_PID_FILE"); f != "" {
		os.WriteFile(f, []byte(fmt.Sprint(os.Getpid())), 0o644)
	}
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
