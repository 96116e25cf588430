package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Mutation is one item of synchro.push (CONTRACT.md "Push").
type Mutation struct {
	ID          string         `json:"id"`    // a uuid, unique per mutation; reuse it to retry
	Table       string         `json:"table"` // table_id
	Op          string         `json:"op"`    // "insert", "update" or "delete"
	PK          any            `json:"pk"`    // a string for string keys, an integer for int keys
	BaseVersion *string        `json:"base_version,omitempty"`
	Row         map[string]any `json:"row,omitempty"`
}

// Result is the outcome of one mutation.
type Result struct {
	ID     string `json:"id"`
	Status string `json:"status"` // "accepted", "conflict" or "rejected"
	// Version: accepted: the new version; conflict: the current one ("" when the
	// row is absent).
	Version string `json:"version"`
	// Row: accepted: the stored row (none for a delete); conflict: the current row
	// (JSON null when absent).
	Row    json.RawMessage `json:"row,omitempty"`
	Code   string          `json:"code,omitempty"`   // rejected: the SQLSTATE
	Reason string          `json:"reason,omitempty"` // rejected: a short reason
}

// Results are the outcomes of a push, one per mutation, in order.
type Results []Result

// Push sends mutations in one synchro.push call (one server transaction) and returns
// the outcome of each. It does not touch the local replica: accepted writes come
// back through pull. Push never retries: when a call failed with a transient error
// (serialization failure, deadlock, timeout, a lost connection: the call may even have
// committed), the caller retries it as a whole with the same mutation ids, and a
// mutation already decided returns its recorded outcome (docs/errors.md). SY400 is a
// bad call, and retrying it fails the same way, as does a value PostgreSQL cannot take
// as text (a NUL character: 22P05, the whole call, before synchro.push runs); SY410
// (ErrIdempotencyConflict) is a client bug: a mutation id reused with other content.
// SY409 (ErrClientRetired) is final for this client id.
func (c *Client) Push(ctx context.Context, mutations []Mutation) (Results, error) {
	if len(mutations) == 0 {
		return nil, errors.New("synchro client: push needs 1 to 1000 mutations")
	}
	body, err := json.Marshal(mutations)
	if err != nil {
		return nil, err
	}
	raw, err := c.rpc(ctx, "push", c.cfg.ClientID, string(body))
	if err != nil {
		if sqlState(err) == codeRebuildRequired {
			// On push, SY409 means the client id itself is gone (retire_client),
			// not a cursor: no rebuild of a scope can fix it.
			return nil, fmt.Errorf("%w: %w", ErrClientRetired, err)
		}
		return nil, classify(err)
	}
	var out struct {
		Results Results `json:"results"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out.Results, nil
}
