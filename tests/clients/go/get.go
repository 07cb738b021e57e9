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
//
// The soak: GET_SERVE=1 makes it a server instead (keep-alive HTTP/1.1 on
// 127.0.0.1, "PORT n" printed): "/CODE" answers CODE, "/CODEra" with
// "Retry-After: 1" too, each with "X-N: n" and a body of 1,000 bytes made
// from n. GET_SOAK=N has the client make N requests over its URLs, check
// every byte of every answer against X-N, and print "rss I R" every
// hundredth of them (the resident set after a GC and a return of free
// memory to the system), "soak N bad B goroutines G0 G" (at a tenth of the
// requests, and at the end) and a "count CODE K" line per status.
// GET_LEAK=1 keeps every body (memory that grows, for the soak's check).
package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// the body of answer n (xorshift from n)
func body(n uint64) []byte {
	b := make([]byte, 1000)
	x := n*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

func serve() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("PORT", ln.Addr().(*net.TCPAddr).Port)
	var ctr uint64
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := atomic.AddUint64(&ctr, 1)
		p := strings.TrimPrefix(r.URL.Path, "/")
		code, _ := strconv.Atoi(strings.TrimSuffix(p, "ra"))
		if code == 0 {
			code = 200
		}
		w.Header().Set("X-N", strconv.FormatUint(n, 10))
		if strings.HasSuffix(p, "ra") {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(code)
		w.Write(body(n))
	}))
}

// the resident set, after a collection and a return of free memory
func rss() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	b, _ := os.ReadFile("/proc/self/statm")
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return -1
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func soak(n int, urls []string) {
	counts := map[int]int{}
	bad := 0
	g0 := 0
	var kept [][]byte // GET_LEAK: every body kept (the soak's own negative control)
	buf := new(bytes.Buffer)
	for i := 0; i < n; i++ {
		if i == n/10 {
			g0 = runtime.NumGoroutine()
		}
		if n >= 100 && i%(n/100) == 0 {
			fmt.Printf("rss %d %d\n", i, rss())
		}
		r, err := http.Get(urls[i%len(urls)])
		if err != nil {
			fmt.Printf("error %v\n", err)
			bad++
			continue
		}
		buf.Reset()
		io.Copy(buf, r.Body)
		r.Body.Close()
		x, _ := strconv.ParseUint(r.Header.Get("X-N"), 10, 64)
		if x == 0 || !bytes.Equal(buf.Bytes(), body(x)) {
			bad++
		}
		if os.Getenv("GET_LEAK") != "" {
			kept = append(kept, append([]byte(nil), buf.Bytes()...))
		}
		counts[r.StatusCode]++
	}
	fmt.Printf("soak %d bad %d goroutines %d %d kept %d\n", n, bad, g0, runtime.NumGoroutine(), len(kept))
	printCounts(counts)
}

func printCounts(counts map[int]int) {
	codes := []int{}
	for c := range counts {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		fmt.Printf("count %d %d\n", c, counts[c])
	}
}

func main() {
	if os.Getenv("GET_SERVE") != "" {
		serve()
		return
	}
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
	if n, _ := strconv.Atoi(os.Getenv("GET_SOAK")); n > 0 {
		soak(n, os.Args[1:])
		pprof.StopCPUProfile()
		return
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
	printCounts(counts)
	pprof.StopCPUProfile()
	os.Exit(rc)
}
