package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	toolkit "github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
)

// DefaultListenAddress is loopback only, on a port clear of node_exporter (9100) and
// postgres_exporter (9187), which usually run on the same host.
const DefaultListenAddress = "127.0.0.1:9817"

// HTTP server timeouts. A scrape takes milliseconds; the limits only bound what a slow or
// hostile client can hold.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	// ShutdownTimeout bounds the wait for requests in flight when the server stops.
	ShutdownTimeout = 5 * time.Second
)

// Config configures a Server.
type Config struct {
	// ListenAddresses are host:port pairs (default DefaultListenAddress).
	ListenAddresses []string
	// WebConfigFile is exporter-toolkit's web configuration (TLS, basic auth); empty serves
	// plain HTTP without authentication.
	WebConfigFile string
	// Version and GoVersion label build_info and show on the landing page.
	Version   string
	GoVersion string
	// Collectors are served on /metrics beside the advisor's (HandlerOptions.Collectors).
	Collectors []prometheus.Collector
	// Apply is the apply mode's status for the landing page (HandlerOptions.Apply).
	Apply apply.StatusSource
}

// Server serves the handler of NewHandler through exporter-toolkit.
type Server struct {
	// One http.Server per listen address: exporter-toolkit's Serve wraps the server's Handler
	// for basic auth, and with several addresses on one server (ServeMultiple) the wrapping
	// would race.
	servers []listener
	logger  *zap.Logger
	slog    *slog.Logger
}

type listener struct {
	addr  string
	srv   *http.Server
	flags *toolkit.FlagConfig
}

// NewServer checks cfg (the web configuration file is read and validated now, so that a bad
// one stops the daemon at start rather than at the first connection) and returns a server over
// src. Nothing listens until Serve.
func NewServer(src StateSource, cfg Config, logger *zap.Logger) (*Server, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	logger = logger.With(zap.String("component", "web"))
	addrs := slices.Clone(cfg.ListenAddresses)
	if len(addrs) == 0 {
		addrs = []string{DefaultListenAddress}
	}
	if err := toolkit.Validate(cfg.WebConfigFile); err != nil {
		return nil, fmt.Errorf("web configuration %s: %w", cfg.WebConfigFile, err)
	}
	if err := checkBcryptCost(cfg.WebConfigFile); err != nil {
		return nil, fmt.Errorf("web configuration %s: %w", cfg.WebConfigFile, err)
	}
	h, err := NewHandler(src, HandlerOptions{Version: cfg.Version, GoVersion: cfg.GoVersion, Logger: logger, Collectors: cfg.Collectors, Apply: cfg.Apply})
	if err != nil {
		return nil, err
	}
	s := &Server{
		logger: logger,
		// exporter-toolkit logs through slog: bridge it to the daemon's one zap logger.
		slog: slog.New(zapslog.NewHandler(logger.Core())),
	}
	for _, addr := range addrs {
		one, configFile := []string{addr}, cfg.WebConfigFile
		s.servers = append(s.servers, listener{
			addr: addr,
			srv: &http.Server{
				Handler:           h,
				ReadHeaderTimeout: readHeaderTimeout,
				ReadTimeout:       readTimeout,
				WriteTimeout:      writeTimeout,
				IdleTimeout:       idleTimeout,
				MaxHeaderBytes:    maxHeaderBytes,
				// TLS handshake failures and the like go to the daemon's log, not to stderr.
				ErrorLog: zap.NewStdLog(logger),
			},
			flags: &toolkit.FlagConfig{WebListenAddresses: &one, WebConfigFile: &configFile},
		})
	}
	return s, nil
}

// Serve listens on every address and serves until ctx ends, then shuts down, waiting up to
// ShutdownTimeout for requests in flight. It returns nil after a shutdown, and an error (having
// stopped every listener) when it cannot listen or serve on one of the addresses.
func (s *Server) Serve(ctx context.Context) error {
	type result struct {
		addr string
		err  error
	}
	results := make(chan result, len(s.servers))
	for _, l := range s.servers {
		go func() { results <- result{l.addr, toolkit.ListenAndServe(l.srv, l.flags, s.slog)} }()
	}
	var failed error
	pending := len(s.servers)
	select {
	case r := <-results:
		pending--
		if !errors.Is(r.err, http.ErrServerClosed) {
			failed = fmt.Errorf("serve http on %s: %w", r.addr, r.err)
		}
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	var cutOff error
	for _, l := range s.servers {
		if err := l.srv.Shutdown(shutdownCtx); err != nil {
			// Requests still running after the grace period: cut them off.
			_ = l.srv.Close()
			cutOff = err
		}
	}
	for ; pending > 0; pending-- {
		if r := <-results; failed == nil && r.err != nil && !errors.Is(r.err, http.ErrServerClosed) {
			failed = fmt.Errorf("serve http on %s: %w", r.addr, r.err)
		}
	}
	if cutOff != nil {
		s.logger.Warn("http shutdown cut off requests in flight", zap.Duration("grace", ShutdownTimeout), zap.Error(cutOff))
	}
	return failed
}
