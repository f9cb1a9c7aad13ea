"""Security: listeners and their protocols, TLS, SASL (PLAIN, SCRAM), SCRAM credentials,
ACLs and the authorizer (``docs/security.md``)."""
