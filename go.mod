module github.com/airlock-sandbox/airlock

go 1.26

require github.com/opencontainers/runtime-spec v1.3.0
