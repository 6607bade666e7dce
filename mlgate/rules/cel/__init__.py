"""CEL validations of MLPolicy (docs/authoring.md): the environment and Kubernetes libraries (`env`, `library`),
the workload view (`view`), and the validations the engine runs as checks (`validation`)."""
