package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// servers are the `orderly serve` child processes under test, each on its own 127.0.0.1
// port: the bench reads their CPU time and peak RSS from /proc.
type servers struct {
	procs []*exec.Cmd
	urls  []string
	logs  []string
	// secret is the instances' --callback-secret.
	secret string
	wg     sync.WaitGroup
}

// serverConfig configures startServers.
type serverConfig struct {
	Binary      string
	Instances   int
	DatabaseURL string
	Secret      string
	Extra       []string
	// Global are the program's flags, before "serve".
	Global []string
	LogDir string
}

// startServers starts the instances, the first one alone (it migrates), and waits until
// each answers GET /readyz with 200 (30 s at most).
func startServers(ctx context.Context, cfg serverConfig) (_ *servers, err error) {
	s := &servers{secret: cfg.Secret}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	for i := range max(cfg.Instances, 1) {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := l.Addr().String()
		_ = l.Close()
		logPath := filepath.Join(cfg.LogDir, fmt.Sprintf("instance-%d.log", i+1))
		f, err := os.Create(logPath) //nolint:gosec // a path of our own
		if err != nil {
			return nil, err
		}
		args := append(slices.Clone(cfg.Global), "serve", "--addr", addr, "--database-url", cfg.DatabaseURL, "--callback-secret", cfg.Secret,
			"--instance-id", fmt.Sprintf("bench-%d", i+1))
		args = append(args, cfg.Extra...)
		cmd := exec.Command(cfg.Binary, args...) //nolint:gosec,noctx // our own binary; Stop ends it
		cmd.Stdout, cmd.Stderr = f, f
		cmd.Env = childEnv()
		if err := cmd.Start(); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("bench: start orderly serve: %w", err)
		}
		s.wg.Go(func() { _ = cmd.Wait(); _ = f.Close() })
		s.procs = append(s.procs, cmd)
		s.urls = append(s.urls, "http://"+addr)
		s.logs = append(s.logs, logPath)
		if err := waitReady(ctx, "http://"+addr, logPath); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// childEnv is this process's environment without ORDERLY_* variables: the server gets its
// configuration from its arguments only.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORDERLY_") {
			env = append(env, kv)
		}
	}
	return env
}

func waitReady(ctx context.Context, base, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(logPath) //nolint:gosec // our own log
			return fmt.Errorf("bench: server %s not ready: %w; its log ends:\n%s", base, ctx.Err(), lastBytes(b, 2000))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func lastBytes(b []byte, n int) string { return string(b[max(0, len(b)-n):]) }

// URLs returns the base URLs of the instances.
func (s *servers) URLs() []string { return s.urls }

// Stop sends SIGTERM to every instance and waits (SIGKILL after 10 s).
func (s *servers) Stop() {
	for _, p := range s.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		for _, p := range s.procs {
			_ = p.Process.Kill()
		}
		<-done
	}
}

// usage is what /proc says of the instances: CPU seconds (user + system) and the
// largest peak resident set (VmHWM), in MiB.
type usage struct {
	CPUSeconds float64
	PeakRSSMB  float64
}

// Usage reads /proc/<pid>/stat and /proc/<pid>/status of every instance; CPU is summed,
// the peak RSS is the largest.
func (s *servers) Usage() (usage, error) {
	var u usage
	for _, p := range s.procs {
		cpu, err := procCPU(p.Process.Pid)
		if err != nil {
			return u, err
		}
		rss, err := procHWM(p.Process.Pid)
		if err != nil {
			return u, err
		}
		u.CPUSeconds += cpu
		u.PeakRSSMB = max(u.PeakRSSMB, rss)
	}
	return u, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// procCPU returns utime + stime of a process in seconds.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: /proc stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("bench: /proc stat: short")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / clockTicks, nil
}

// procHWM returns VmHWM (peak resident set) of a process in MiB.
func procHWM(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("bench: /proc status: no VmHWM")
}
