module github.com/switchboardhq/switchboard

go 1.26.8

require go.etcd.io/bbolt v1.5.0

require (
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
