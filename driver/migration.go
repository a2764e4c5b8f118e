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
//
// Directives in the file's leading comment lines tune how it is applied:
//
//	-- idem:compatible-from N   binaries whose newest migration is N or
//	                            later still run on the schema with this
//	                            migration applied (an expand step: a new
//	                            index, table or nullable column). Default:
//	                            the migration's own version, so only a
//	                            binary that knows it runs on it.
//	-- idem:no-transaction      PostgreSQL runs its statements one at a
//	                            time outside a transaction, for CREATE
//	                            INDEX CONCURRENTLY, which does not block
//	                            writes. Each statement must be safe to run
//	                            again (IF NOT EXISTS), since a crash can
//	                            leave some applied and the migration not
//	                            recorded. SQLite ignores it.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// CompatibleFrom is the oldest binary, named by its newest migration,
	// that can run on a schema that includes this migration.
	CompatibleFrom int
	// NoTransaction asks for the statements to run outside a transaction.
	NoTransaction bool
}

// Statements splits the migration's SQL at lines that end with ";", for
// migrations run one statement at a time (NoTransaction). Comment-only
// and blank pieces are dropped.
func (m Migration) Statements() []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		stmt := strings.TrimSpace(cur.String())
		cur.Reset()
		for _, line := range strings.Split(stmt, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
				out = append(out, stmt)
				return
			}
		}
	}
	for _, line := range strings.SplitAfter(m.SQL, "\n") {
		cur.WriteString(line)
		if strings.HasSuffix(strings.TrimSpace(line), ";") && !strings.HasPrefix(strings.TrimSpace(line), "--") {
			flush()
		}
	}
	flush()
	return out
}

// SchemaStatus is a database's schema beside one binary's migrations.
type SchemaStatus struct {
	// Applied is the newest migration the database has (0: none).
	Applied int
	// Latest is the newest migration the binary embeds.
	Latest int
	// Required is the oldest binary (by its newest migration) that can run
	// on the schema as applied: the largest CompatibleFrom of the applied
	// migrations.
	Required int
}

// PendingOf is the part of ms (a driver's migrations, in order) that a
// database at st lacks: none on a schema as new as ms or newer.
func PendingOf(ms []Migration, st SchemaStatus) []Migration {
	return ms[min(st.Applied, len(ms)):]
}

// Pending reports whether the binary has migrations the database lacks.
func (s SchemaStatus) Pending() bool { return s.Applied < s.Latest }

// TooNew reports whether the schema is newer than the binary can run on.
func (s SchemaStatus) TooNew() bool { return s.Latest < s.Required }

// Runnable reports whether the binary can serve on the schema as it is:
// nothing pending, and not too new.
func (s SchemaStatus) Runnable() bool { return !s.Pending() && !s.TooNew() }

// Err explains why the binary cannot serve on the schema, or is nil.
func (s SchemaStatus) Err() error {
	switch {
	case s.Pending():
		return fmt.Errorf("database is at migration %d and this binary needs %d: run idem migrate (or start with migrations on)", s.Applied, s.Latest)
	case s.TooNew():
		return fmt.Errorf("database is at migration %d, which needs a binary of migration %d or later; this binary has %d", s.Applied, s.Required, s.Latest)
	}
	return nil
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
		m := Migration{Version: v, Name: name, SQL: string(b), CompatibleFrom: v}
		if err := m.readDirectives(); err != nil {
			return nil, fmt.Errorf("migration %q: %w", e.Name(), err)
		}
		ms = append(ms, m)
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

// readDirectives reads the idem: directives of the leading comment lines.
func (m *Migration) readDirectives() error {
	for _, line := range strings.Split(m.SQL, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "--") {
			return nil
		}
		directive, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(line, "--")), "idem:")
		if !ok {
			continue
		}
		switch name, arg, _ := strings.Cut(directive, " "); name {
		case "compatible-from":
			v, err := strconv.Atoi(strings.TrimSpace(arg))
			if err != nil || v < 1 || v > m.Version {
				return fmt.Errorf("idem:compatible-from %q: want a migration version 1..%d", arg, m.Version)
			}
			m.CompatibleFrom = v
		case "no-transaction":
			m.NoTransaction = true
		default:
			return fmt.Errorf("unknown directive idem:%s", name)
		}
	}
	return nil
}
