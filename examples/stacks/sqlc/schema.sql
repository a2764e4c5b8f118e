CREATE TABLE orders (
    id       text   PRIMARY KEY,
    customer text   NOT NULL,
    amount   bigint NOT NULL CHECK (amount > 0)
);
