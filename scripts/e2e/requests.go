package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/harvest-hpc/harvest/pilotproto"
)

// requestLog sits between the pilots and the queue (the agent advertises
// it to the pilots): a reverse proxy that notes when each pilot request
// reached the queue, to count the lease and heartbeat requests per second
// (a failover must not set off a storm of them).
type requestLog struct {
	mu  sync.Mutex
	at  map[string][]time.Time // by path
	srv *http.Server
	url string
}

// startRequestLog listens on a free local port and forwards to queue.
func startRequestLog(queue string) (*requestLog, error) {
	target, err := url.Parse(queue)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &requestLog{at: map[string][]time.Time{}, url: "http://" + ln.Addr().String()}
	proxy := httputil.NewSingleHostReverseProxy(target)
	// A pilot that hangs up (killed, cancelled) is no error of the run.
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) }
	l.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.at[r.URL.Path] = append(l.at[r.URL.Path], time.Now())
		l.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go l.srv.Serve(ln)
	return l, nil
}

func (l *requestLog) close() { l.srv.Close() }

// rates prints, per pilot endpoint, the requests per second over [from,
// to], and the most in any one second; and the lease requests in the 10 s
// after each kill.
func (l *requestLog) rates(from, to time.Time, kills []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	span := to.Sub(from).Seconds()
	if span <= 0 {
		return
	}
	var paths []string
	for p := range l.at {
		if strings.HasPrefix(p, "/v1/pilot/") {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	fmt.Printf("  queue requests from pilots (%.0f s, through a counting proxy):", span)
	for _, p := range paths {
		n, peak := 0, 0
		ts := l.at[p]
		for i, t := range ts {
			if t.Before(from) || t.After(to) {
				continue
			}
			n++
			j := sort.Search(len(ts), func(k int) bool { return !ts[k].Before(t.Add(time.Second)) })
			peak = max(peak, j-i)
		}
		fmt.Printf(" %s %.2f/s (most in 1 s: %d);", strings.TrimPrefix(p, "/v1/pilot/"), float64(n)/span, peak)
	}
	fmt.Println()
	for i, k := range kills {
		n := 0
		for _, t := range l.at[pilotproto.PathLease] {
			if !t.Before(k) && t.Before(k.Add(10*time.Second)) {
				n++
			}
		}
		fmt.Printf("  lease requests in the 10 s after kill -9 #%d: %d\n", i+1, n)
	}
}
