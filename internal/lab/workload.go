package lab

import (
	"context"
	"fmt"
	"time"
)

// BulkInsert is seed 001's workload: one INSERT ... SELECT generate_series of rows integers
// into a fresh table with a primary key. It returns the time the INSERT took.
func (c *Cluster) BulkInsert(ctx context.Context, table string, rows int) (time.Duration, error) {
	conn, err := c.Connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	ident := fmt.Sprintf("%q", table)
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+ident); err != nil {
		return 0, fmt.Errorf("drop %s: %w", table, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE "+ident+" (id integer PRIMARY KEY)"); err != nil {
		return 0, fmt.Errorf("create %s: %w", table, err)
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, "INSERT INTO "+ident+" (id) SELECT generate_series(1, $1::int)", rows); err != nil {
		return 0, fmt.Errorf("bulk insert into %s: %w", table, err)
	}
	return time.Since(start), nil
}

// BatchedLoad is seed 001's bulk insert cut into transactions of batch rows, as a loader that
// commits every batch does. It runs until rows are loaded or ctx ends and returns the time taken.
// PostgreSQL counts a backend's WAL activity in pg_stat_wal only when its transaction ends, so
// a single long INSERT shows nothing there until it finishes; batches make it visible as it goes.
func (c *Cluster) BatchedLoad(ctx context.Context, table string, rows, batch int) (time.Duration, error) {
	conn, err := c.Connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	ident := fmt.Sprintf("%q", table)
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+ident+"; CREATE TABLE "+ident+" (id integer PRIMARY KEY)"); err != nil {
		return 0, fmt.Errorf("create %s: %w", table, err)
	}
	start := time.Now()
	for from := 1; from <= rows; from += batch {
		to := min(from+batch-1, rows)
		if _, err := conn.Exec(ctx, "INSERT INTO "+ident+" (id) SELECT generate_series($1::int, $2::int)", from, to); err != nil {
			return time.Since(start), fmt.Errorf("load rows %d-%d into %s: %w", from, to, table, err)
		}
	}
	return time.Since(start), nil
}
