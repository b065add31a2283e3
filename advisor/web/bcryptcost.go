package web

import (
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
)

// maxBcryptCost bounds the cost of the basic-auth hashes: exporter-toolkit checks every request's
// password against its user's hash before anything else, so a wrong password costs whoever
// sends it nothing and the daemon 2^cost rounds: one comparison took 57 ms at cost 10 (bcrypt's
// default), 228 ms at 12 and 464 ms at 13 on the project's 2-core test machine (docs/security.md).
const maxBcryptCost = 12

// maxWebConfigBytes bounds the web configuration file read at start.
const maxWebConfigBytes = 1 << 20

// checkBcryptCost refuses a web configuration whose basic_auth_users hashes cost more than
// maxBcryptCost, naming the user and how to make a cheaper hash.
func checkBcryptCost(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxWebConfigBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxWebConfigBytes {
		return fmt.Errorf("over %d MiB: that is no web configuration", maxWebConfigBytes>>20)
	}
	var doc struct {
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	for user, hash := range doc.Users {
		cost, err := bcrypt.Cost([]byte(hash))
		if err != nil {
			return fmt.Errorf("basic_auth_users %q: not a bcrypt hash: %w", user, err)
		}
		if cost > maxBcryptCost {
			return fmt.Errorf("basic_auth_users %q: bcrypt cost %d makes every wrong password cost the daemon seconds of CPU, unauthenticated; "+
				"use a cost of at most %d (htpasswd -nbBC 10 USER PASSWORD)", user, cost, maxBcryptCost)
		}
	}
	return nil
}
