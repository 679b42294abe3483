module github.com/xadm/mensageria/driver/mysql

go 1.26.0

require github.com/xadm/mensageria v0.1.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/google/uuid v1.6.0
)

require filippo.io/edwards25519 v1.2.0 // indirect
