"""Server tests: programs under `paralog run`, crashes."""
