// Command rttproxy is a TCP proxy that delays every chunk of bytes by a fixed one-way time in
// each direction without throttling the stream (each chunk is stamped on arrival and written at
// stamp + delay), so a client on localhost sees the round-trip time of a database across a
// network. It measures what round trips cost an API, e.g. InsertManyFast at 0.5 ms RTT:
//
//	go run ./cmd/rttproxy -delay 250us &   # listens on 127.0.0.1:15432, forwards to :5432
//	cd .. && TEST_DATABASE_URL='postgres://postgres@127.0.0.1:15432/test?sslmode=disable' \
//	    go test -run '^$' -bench 'BulkEnqueueVsCeiling/pad=240' -benchtime 2x ./jobs/
package main

import (
	"flag"
	"log"
	"net"
	"time"
)

type chunk struct {
	at time.Time
	b  []byte
}

// pump copies from → to, each chunk delivered delay after it was read.
func pump(from, to net.Conn, delay time.Duration) {
	ch := make(chan chunk, 4096)
	go func() {
		defer to.Close()
		for c := range ch {
			time.Sleep(time.Until(c.at))
			if _, err := to.Write(c.b); err != nil {
				return
			}
		}
	}()
	defer close(ch)
	for {
		buf := make([]byte, 64<<10)
		n, err := from.Read(buf)
		if n > 0 {
			ch <- chunk{time.Now().Add(delay), buf[:n]}
		}
		if err != nil {
			return
		}
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:15432", "address to listen on")
	target := flag.String("target", "127.0.0.1:5432", "address to forward to")
	delay := flag.Duration("delay", 250*time.Microsecond, "one-way delay (the round trip is twice it)")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("rttproxy: %s -> %s, %s each way", *listen, *target, *delay)
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			s, err := net.Dial("tcp", *target)
			if err != nil {
				log.Printf("rttproxy: dial %s: %v", *target, err)
				c.Close()
				return
			}
			go pump(c, s, *delay)
			go pump(s, c, *delay)
		}()
	}
}
