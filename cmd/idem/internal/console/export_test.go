package console

import "context"

// SampleOutbox takes one outbox sample now, as Run does at each tick: the
// tests drive the sampler with it (and the console's clock), never with
// the ticker.
func (c *Console) SampleOutbox(ctx context.Context) { c.sample(ctx) }

// OutboxSamples counts the samples kept.
func (c *Console) OutboxSamples() int { return len(c.flow.samples()) }
