package config

import (
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// File is the configuration file. Pointers tell "not set" from a zero value.
type File struct {
	Interval   *time.Duration `yaml:"interval"`
	WaitEvents struct {
		Interval *time.Duration `yaml:"interval"`
	} `yaml:"wait_events"`
	History struct {
		Window *time.Duration `yaml:"window"`
	} `yaml:"history"`
	Probe struct {
		Dir      *string        `yaml:"dir"`
		Interval *time.Duration `yaml:"interval"`
		Burst    *time.Duration `yaml:"burst"`
	} `yaml:"probe"`
	Web struct {
		ListenAddress stringList `yaml:"listen_address"`
		ConfigFile    *string    `yaml:"config_file"`
	} `yaml:"web"`
	Log struct {
		Level *string `yaml:"level"`
	} `yaml:"log"`
	// Thresholds are rules.Thresholds' fields in snake_case (raise_after, wal_buffers_floor).
	Thresholds map[string]yaml.Node `yaml:"thresholds"`
}

// stringList takes one string or a list of them (listen_address: ":9817" or a list).
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = stringList{n.Value}
		return nil
	case yaml.SequenceNode:
		var s []string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*l = s
		return nil
	}
	return fmt.Errorf("line %d: want an address or a list of addresses", n.Line)
}

// maxFileBytes bounds the configuration file: every key of docs/http.md fits in a few kB. A file far
// larger is a mistake (or an attempt on the daemon's memory limit: 100 MB of YAML took 721 MB
// to parse), refused before it is parsed.
const maxFileBytes = 1 << 20

// Load reads and checks the configuration file at path.
func Load(path string) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, fmt.Errorf("read config file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return File{}, fmt.Errorf("read config file: %w", err)
	}
	if len(b) > maxFileBytes {
		return File{}, fmt.Errorf("config file %s is over %d MiB, far more than any configuration needs (docs/http.md): is it the right file?", path, maxFileBytes>>20)
	}
	fc, err := Parse(b)
	if err != nil {
		return File{}, fmt.Errorf("config file %s: %w", path, err)
	}
	return fc, nil
}

// Parse decodes a configuration file's contents. Unknown keys are errors that name the key,
// so that a typo is not silently ignored; the values' bounds are Resolve's to check, where
// the flags given on the command line have been merged in.
func Parse(b []byte) (File, error) {
	var fc File
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fc, err
	}
	if err := checkKeys(&doc, reflect.TypeFor[File](), ""); err != nil {
		return fc, err
	}
	if len(doc.Content) > 0 {
		if err := doc.Decode(&fc); err != nil {
			return File{}, err
		}
	}
	return fc, nil
}

// checkKeys refuses keys that t (a struct with yaml tags) does not have, naming the key with
// its path and line and listing the keys that exist there.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	// An alias stands for the node it names: its keys are checked as if written out (the
	// decoder follows it too).
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return checkKeys(n.Content[0], t, path)
	}
	if n.Kind != yaml.MappingNode {
		return nil // a value of the wrong type is the decoder's to report
	}
	fields := map[string]reflect.Type{}
	if t.Kind() == reflect.Map {
		// The thresholds: keys are rules.Thresholds' fields.
		for k := range thresholdFields() {
			fields[k] = nil
		}
	} else {
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			fields[name] = t.Field(i).Type
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		full := k.Value
		if path != "" {
			full = path + "." + k.Value
		}
		ft, ok := fields[k.Value]
		if !ok {
			where := ""
			if path != "" {
				where = " under " + path
			}
			return fmt.Errorf("line %d: unknown key %q (known keys%s: %s)", k.Line, full, where, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
		}
		if ft != nil && (ft.Kind() == reflect.Struct || ft.Kind() == reflect.Map) {
			if err := checkKeys(v, ft, full); err != nil {
				return err
			}
		}
	}
	return nil
}

// thresholdFields maps the configuration file's threshold keys to rules.Thresholds' field
// indexes: the Go field name in snake_case, so that docs/rules.md's table names them too.
func thresholdFields() map[string]int {
	t := reflect.TypeFor[rules.Thresholds]()
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		m[snakeCase(t.Field(i).Name)] = i
	}
	return m
}

// snakeCase turns a Go field name into a configuration key: WALBuffersFloor -> wal_buffers_floor.
func snakeCase(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// removedThreshold says what replaced a key earlier releases read: a file that still sets one
// is told so rather than "unknown key".
func removedThreshold(key string) (string, bool) {
	switch key {
	case "fpi_idle_min":
		return "wal_compression is decided by the CPU time compressing the server's own images measures on this host " +
			"(thresholds.fpi_idle_cpu_share, thresholds.fpi_saving_min; docs/rules.md, full-page-images)", true
	}
	return "", false
}

// applyThresholds sets the file's thresholds over th; their bounds are checked with the rest
// of the configuration.
func applyThresholds(th *rules.Thresholds, nodes map[string]yaml.Node) error {
	fields := thresholdFields()
	v := reflect.ValueOf(th).Elem()
	for _, key := range slices.Sorted(maps.Keys(nodes)) {
		node := nodes[key]
		i, ok := fields[key]
		if why, gone := removedThreshold(key); gone {
			return fmt.Errorf("thresholds.%s was removed: %s; delete the line", key, why)
		}
		if !ok {
			return fmt.Errorf("unknown key %q", "thresholds."+key)
		}
		field := v.Field(i)
		val := reflect.New(field.Type())
		if err := node.Decode(val.Interface()); err != nil {
			return fmt.Errorf("thresholds.%s: %w", key, err)
		}
		field.Set(val.Elem())
	}
	return nil
}
