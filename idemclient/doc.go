// Package idemclient is the client's half of idem's Idempotency-Key
// contract, in the standard library only.
//
// Transport is an http.RoundTripper any http.Client can use: a request
// that needs a key gets one once, keeps it on every attempt, and what is
// safe to retry is retried, honouring Retry-After, within a budget and the
// request's context (docs/clients.md, "Retry rules"). Client is a typed
// client for idem's own API built on it: problems are errors matched with
// errors.Is on their stable codes, and every answer says whether it was a
// replay.
//
// The key that prevents a double charge when the caller itself dies is the
// one the caller stored with its own record before the first attempt, and
// passes on every call for that record (WithKey): a process started after
// a crash sends it again and gets the first one's answer, marked replayed.
package idemclient
