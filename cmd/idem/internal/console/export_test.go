package console

import (
	"context"
	"io/fs"
	"path"
)

// SampleOutbox takes one outbox sample now, as Run does at each tick: the
// tests drive the sampler with it (and the console's clock), never with
// the ticker.
func (c *Console) SampleOutbox(ctx context.Context) { c.sample(ctx) }

// OutboxSamples counts the samples kept.
func (c *Console) OutboxSamples() int { return len(c.flow.samples()) }

// StyleSheets are the style sheets the console serves under
// /ui/static/, by name, with their text.
func StyleSheets() (map[string]string, error) {
	names, err := fs.Glob(staticFS, "static/*.css")
	if err != nil {
		return nil, err
	}
	sheets := make(map[string]string, len(names))
	for _, n := range names {
		b, err := fs.ReadFile(staticFS, n)
		if err != nil {
			return nil, err
		}
		sheets[path.Base(n)] = string(b)
	}
	return sheets, nil
}
