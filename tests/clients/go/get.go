// get.go -- a Go client with no timeouts at all (net/http's default
// client): GET each URL, print the status or the error; exit 1 on an error.
// Its main goroutine keeps the main thread, so that its connects come from
// another thread, as a busy Go program's do (the seccomp engine is told the
// thread, and must name the process). With GET_PID_FILE set it writes its
// pid there. GET_INSECURE=1 accepts any certificate (the tests' own);
// GET_PROTO=1 prints each answer's protocol too ("proto HTTP/2.0");
// GET_REPEAT=N goes over the URLs N times, printing one line per status at
// the end ("count 200 N"), with GET_BUSY=K goroutines spinning beside it
// (the runtime preempts them by signal); GET_PROF=FILE runs a CPU profile
// meanwhile (SIGPROF 100 times a second on every thread).
package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"time"
)

func main() {
	runtime.LockOSThread()
	if f := os.Getenv("GET_PID_FILE"); f != "" {
		os.WriteFile(f, []byte(fmt.Sprint(os.Getpid())), 0o644)
	}
	if os.Getenv("GET_INSECURE") != "" {
		http.DefaultTransport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	if f := os.Getenv("GET_PROF"); f != "" {
		w, _ := os.Create(f)
		pprof.StartCPUProfile(w)
	}
	repeat, _ := strconv.Atoi(os.Getenv("GET_REPEAT"))
	busy, _ := strconv.Atoi(os.Getenv("GET_BUSY"))
	for i := 0; i < busy; i++ {
		go func() {
			x := 0
			for {
				x++
			}
		}()
	}
	counts := map[int]int{}
	rc := 0
	for n := 0; n < repeat || n == 0; n++ {
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
			if repeat > 1 {
				counts[r.StatusCode]++
				continue
			}
			if os.Getenv("GET_PROTO") != "" {
				fmt.Printf("proto %s\n", r.Proto)
			}
			fmt.Printf("status %d %.0fms\n", r.StatusCode, float64(time.Since(t0).Microseconds())/1000)
		}
	}
	codes := []int{}
	for c := range counts {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		fmt.Printf("count %d %d\n", c, counts[c])
	}
	pprof.StopCPUProfile()
	os.Exit(rc)
}
