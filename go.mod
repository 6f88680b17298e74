module github.com/airlock-sandbox/airlock

go 1.26

require (
	github.com/expr-lang/expr v1.17.8 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	github.com/tetratelabs/wazero v1.12.0
	go.starlark.net v0.0.0-20260908191801-89a6a09411d5 // indirect
	golang.org/x/sys v0.44.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
