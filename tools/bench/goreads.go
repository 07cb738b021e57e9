// goreads.go -- a Go program's N reads: it listens on loopback, dials
// itself, and makes N one-byte round trips (a write and a read each way),
// for make bench's count of the system calls the seccomp engine adds.
//
//	goreads N
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			c.Write(b)
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		panic(err)
	}
	b := []byte{'x'}
	for i := 0; i < n; i++ {
		c.Write(b)
		if _, err := c.Read(b); err != nil {
			panic(err)
		}
	}
	fmt.Println("round_trips", n)
}
