// Package schema is ent's schema of the shop's business table; ent
// generates the client in the package above from it (go generate ./...).
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// Order is a row of orders.
type Order struct{ ent.Schema }

// Fields of an order: its id is the shop's, derived from the request's key.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").Immutable(),
		field.String("customer"),
		field.Int64("amount").Positive(),
	}
}

// Annotations name the table.
func (Order) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "orders"}}
}
