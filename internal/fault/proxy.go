package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from a free port of 127.0.0.1 to an upstream address. Cut
// closes every connection through it and, for the length of an outage, closes new ones as
// soon as they are accepted: to the client, the upstream is gone (connection reset or
// closed), and it comes back when the outage ends. It is safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	done     chan struct{}

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	downUntil time.Time
	closed    bool
	wg        sync.WaitGroup
}

// StartProxy listens on a free port of 127.0.0.1 and forwards to upstream (host:port).
func StartProxy(ctx context.Context, upstream string) (*Proxy, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault: proxy: %w", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection through the proxy and refuses new ones for d.
func (p *Proxy) Cut(d time.Duration) {
	p.mu.Lock()
	p.downUntil = time.Now().Add(d)
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// Close stops listening and closes every connection; it waits for the forwarding
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut(0)
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		if p.closed || time.Now().Before(p.downUntil) {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.forward(c)
	}
}

// track registers conns for Cut; it reports false (and closes them) during an outage.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || time.Now().Before(p.downUntil) {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second}
	up, err := d.Dial("tcp", p.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, up) {
		return
	}
	defer p.untrack(client, up)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(up, client)
		_ = up.Close()
	})
	_, _ = io.Copy(client, up)
	_ = client.Close()
	wg.Wait()
}
