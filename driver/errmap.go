package driver

import (
	"context"
	"errors"
	"fmt"
)

// MapCommon is the start every driver's error mapping shares: nil stays
// nil, the driver's no-rows error (noRows) becomes ErrNotFound with the
// original kept, and a cancelled or expired context stays itself, so that
// a caller's own deadline is never taken for the database's. ok is false
// when err is none of these and is the driver's to map.
func MapCommon(err, noRows error) (mapped error, ok bool) {
	switch {
	case err == nil:
		return nil, true
	case errors.Is(err, noRows):
		return fmt.Errorf("%w: %w", ErrNotFound, err), true
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err, true
	}
	return err, false
}
