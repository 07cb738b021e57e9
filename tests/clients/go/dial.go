// dial.go -- N dials to ADDR while B busy goroutines (default 4) keep the
// Go runtime preempting (a signal to a running thread every 10 ms): how
// many succeeded, the errors of the others, and GODEBUG as the program got
// it, as one JSON line.
//
//	dial ADDR N [B]
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
)

func main() {
	n, _ := strconv.Atoi(os.Args[2])
	busy := 4
	if len(os.Args) > 3 {
		busy, _ = strconv.Atoi(os.Args[3])
	}
	var stop int32
	for i := 0; i < busy; i++ {
		go func() {
			x := 0
			for atomic.LoadInt32(&stop) == 0 {
				x++
			}
			runtime.KeepAlive(x)
		}()
	}
	ok, errs := 0, map[string]int{}
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", os.Args[1])
		if err != nil {
			errs[err.Error()]++
			continue
		}
		c.Close()
		ok++
	}
	atomic.StoreInt32(&stop, 1)
	b, _ := json.Marshal(map[string]interface{}{"ok": ok, "errors": errs, "godebug": os.Getenv("GODEBUG")})
	fmt.Println(string(b))
}
