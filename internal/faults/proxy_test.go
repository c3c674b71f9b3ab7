package faults_test

// netProxy: an in-test TCP proxy between a worker and PostgreSQL that can
//   - cut: reset every connection and refuse new ones until restore;
//   - blackhole: keep every connection open but swallow every byte both ways (no RST, no FIN:
//     a silent partition), new connections included;
//   - heal: end the partition as a middlebox that lost its state would: connections that
//     lived through it are half-open. A byte from the client on such a connection is answered
//     with a reset (the client learns at once); a byte from the server resets the server side
//     only (the client is never told). A client that only waits — a LISTEN session — never
//     finds out unless it probes. New connections work normally.

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type proxyPair struct {
	cl, srv net.Conn
	holed   bool // lived through a blackhole
	stale   bool // holed, and the blackhole healed: half-open
}

type netProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	hole  bool
	pairs map[*proxyPair]struct{}
}

func newNetProxy(t *testing.T, target string) *netProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &netProxy{ln: ln, target: target, pairs: map[*proxyPair]struct{}{}}
	go func() {
		for {
			cl, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(cl)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

func (p *netProxy) addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

func reset(c net.Conn) {
	if c == nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *netProxy) serve(cl net.Conn) {
	pr := &proxyPair{cl: cl}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		reset(cl)
		return
	}
	pr.holed = p.hole
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()
	if !pr.holed {
		srv, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			reset(cl)
			return
		}
		p.mu.Lock()
		pr.srv = srv
		p.mu.Unlock()
		go p.pump(pr, srv, cl, false)
	}
	p.pump(pr, cl, pr.srv, true)
}

const (
	fateForward = iota
	fateSwallow
	fateStale
)

func (p *netProxy) fate(pr *proxyPair) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case pr.stale:
		return fateStale
	case p.hole:
		pr.holed = true
		return fateSwallow
	}
	return fateForward
}

func (p *netProxy) pump(pr *proxyPair, from, to net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			switch p.fate(pr) {
			case fateForward:
				if to == nil {
					reset(from)
					return
				}
				if _, werr := to.Write(buf[:n]); werr != nil {
					reset(from)
					return
				}
			case fateStale:
				if fromClient {
					reset(pr.cl)
					reset(pr.srv)
				} else {
					reset(pr.srv) // the client is not told
				}
				return
			}
		}
		if err != nil {
			p.mu.Lock()
			quiet := pr.holed || pr.stale || p.hole
			p.mu.Unlock()
			if !quiet && to != nil {
				_ = to.Close() // pass the close on, as TCP would
			}
			return
		}
	}
}

// cut resets every connection and refuses new ones until restore.
func (p *netProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for pr := range p.pairs {
		reset(pr.cl)
		reset(pr.srv)
	}
	clear(p.pairs)
}

func (p *netProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// blackhole starts a silent partition.
func (p *netProxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
	for pr := range p.pairs {
		pr.holed = true
	}
}

// heal ends the partition; connections that lived through it are half-open.
func (p *netProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = false
	for pr := range p.pairs {
		if pr.holed {
			pr.stale = true
			delete(p.pairs, pr)
		}
	}
}
