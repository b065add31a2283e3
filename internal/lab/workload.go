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
