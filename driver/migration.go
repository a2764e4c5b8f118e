package driver

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one numbered schema change, embedded in a driver.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads the files NNN_name.sql in dir of fsys, in version
// order. Versions must start at 1 and have no gaps or repeats: a missing
// number means a file was lost or two changes were numbered alike, and
// applying the rest would leave a schema nobody tested.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		if !ok || name == "" {
			return nil, fmt.Errorf("migration %q: want NNN_name.sql", e.Name())
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: version %q is not a positive number", e.Name(), num)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", e.Name(), err)
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	if err := validateMigrations(ms); err != nil {
		return nil, err
	}
	return ms, nil
}

func validateMigrations(ms []Migration) error {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			if i > 0 && m.Version == ms[i-1].Version {
				return fmt.Errorf("migrations %d_%s and %d_%s share a version", m.Version, ms[i-1].Name, m.Version, m.Name)
			}
			return fmt.Errorf("migrations have a gap: want version %d, found %d_%s", i+1, m.Version, m.Name)
		}
	}
	return nil
}
