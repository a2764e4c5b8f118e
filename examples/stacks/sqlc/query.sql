-- name: InsertOrder :one
INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3)
RETURNING id, customer, amount;
