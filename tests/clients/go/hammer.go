// hammer.go -- GETs to URL from T goroutines, each on a new connection
// (keep-alives off: the seccomp engine governs connects), from START to END
// (Unix time, seconds): how many got each status, and the errors of the
// others, as one JSON line. No timeouts of its own.
//
//	hammer URL START END T
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

func main() {
	start, _ := strconv.ParseFloat(os.Args[2], 64)
	end, _ := strconv.ParseFloat(os.Args[3], 64)
	n, _ := strconv.Atoi(os.Args[4])
	at := func(t float64) time.Time { return time.Unix(0, int64(t*1e9)) }
	time.Sleep(time.Until(at(start)))
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	statuses, errs := map[string]int{}, map[string]int{}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(at(end)) {
				r, err := client.Get(os.Args[1])
				mu.Lock()
				if err != nil {
					errs[err.Error()]++
				} else {
					statuses[strconv.Itoa(r.StatusCode)]++
				}
				mu.Unlock()
				if err == nil {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	b, _ := json.Marshal(map[string]interface{}{"status": statuses, "errors": errs})
	fmt.Println(string(b))
}
