module github.com/airlock-sandbox/airlock

go 1.26

require (
	github.com/expr-lang/expr v1.17.8
	github.com/stretchr/testify v1.12.1
)

require (
	go.starlark.net v0.0.0-20260908191801-89a6a09411d5
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	gopkg.in/yaml.v3 v3.0.1
)

require golang.org/x/sys v0.42.0 // indirect
