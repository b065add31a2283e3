package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

// patroniFlags choose the route PostgreSQL settings take: ALTER SYSTEM on the server, or, with
// --apply.patroni-url, Patroni's configuration of the cluster (apply.Patroni).
type patroniFlags struct {
	url, user, passwordFile string
}

func (p *patroniFlags) register(f *pflag.FlagSet) {
	f.StringVar(&p.url, "apply.patroni-url", "", "change PostgreSQL settings through this Patroni member's REST API (PATCH /config, for the whole cluster) instead of ALTER SYSTEM; its restapi.connect_address, e.g. http://127.0.0.1:8008")
	f.StringVar(&p.user, "apply.patroni-user", "", "restapi.authentication's user, for --apply.patroni-url")
	f.StringVar(&p.passwordFile, "apply.patroni-password-file", "", "a file holding restapi.authentication's password (one line), for --apply.patroni-url")
}

// postgresRoute returns the actuator PostgreSQL settings go through: pg itself, or the Patroni
// route over pg's connection.
func (p *patroniFlags) postgresRoute(g *cli.Globals, pg *apply.Postgres) (apply.Actuator, error) {
	if p.url == "" {
		if p.user != "" || p.passwordFile != "" {
			return nil, fmt.Errorf("--apply.patroni-user and --apply.patroni-password-file need --apply.patroni-url: %w", cli.ErrUsage)
		}
		return pg, nil
	}
	if !strings.HasPrefix(p.url, "http://") && !strings.HasPrefix(p.url, "https://") {
		return nil, fmt.Errorf("--apply.patroni-url %q: want http://HOST:PORT or https://HOST:PORT (Patroni's restapi.connect_address): %w", p.url, cli.ErrUsage)
	}
	var password string
	if p.passwordFile != "" {
		// As libpq does with a pgpass file: a password others may read is refused.
		st, err := os.Stat(p.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--apply.patroni-password-file: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("--apply.patroni-password-file %s is mode %04o: other users could read Patroni's password; chmod 0600 %s: %w",
				p.passwordFile, st.Mode().Perm(), p.passwordFile, cli.ErrUsage)
		}
		b, err := os.ReadFile(p.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--apply.patroni-password-file: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	return apply.NewPatroni(apply.PatroniOptions{URL: p.url, Username: p.user, Password: password, Logger: g.Logger}, pg), nil
}
