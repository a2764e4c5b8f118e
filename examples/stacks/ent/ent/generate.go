// Package ent is ent's client for the shop's business table, generated
// from ./schema by ent v0.14.5.
package ent

//go:generate go run entgo.io/ent/cmd/ent@v0.14.5 generate ./schema
