package apply

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// ServerBounds returns the bounds the server reports for a numeric setting (pg_settings'
// min_val and max_val, which are in the setting's unit), in bytes, seconds or the plain number
// as numeric reads a value; ok is false for a setting without numeric bounds.
func (p *Postgres) ServerBounds(ctx context.Context, name string) (lo, hi float64, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.session.Connect(ctx); err != nil {
		return 0, 0, false, err
	}
	var minVal, maxVal, unit *string
	var vartype string
	err = p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT vartype, min_val, max_val, unit FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.text`, name).
			Scan(&vartype, &minVal, &maxVal, &unit)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, fmt.Errorf("read the bounds of %s: PostgreSQL %d has no such setting", name, p.session.Server().VersionNum)
	}
	if err != nil {
		return 0, 0, false, p.opErr("read the bounds of "+name+" from pg_settings", err, "")
	}
	if (vartype != "integer" && vartype != "real") || minVal == nil || maxVal == nil {
		return 0, 0, false, nil
	}
	scale, err := unitScale(unit)
	if err != nil {
		return 0, 0, false, fmt.Errorf("the bounds of %s: %w", name, err)
	}
	lo, err1 := strconv.ParseFloat(*minVal, 64)
	hi, err2 := strconv.ParseFloat(*maxVal, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false, fmt.Errorf("the bounds of %s: pg_settings min_val %q, max_val %q are not numbers", name, *minVal, *maxVal)
	}
	return lo * scale, hi * scale, true, nil
}

// unitScale is what one pg_settings unit ("8kB", "ms", "min") is in bytes or seconds.
func unitScale(unit *string) (float64, error) {
	if unit == nil || *unit == "" {
		return 1, nil
	}
	u := *unit
	if u[0] < '0' || u[0] > '9' {
		u = "1" + u // "kB", "MB", "ms", "s", "min"; "8kB" already has its number
	}
	if n, err := collector.ParseMemory(u); err == nil && n > 0 {
		return float64(n), nil
	}
	if s, err := collector.ParseSeconds(u); err == nil && s > 0 {
		return s, nil
	}
	return 0, fmt.Errorf("unknown pg_settings unit %q", *unit)
}
