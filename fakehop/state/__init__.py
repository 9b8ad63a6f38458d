"""What a server keeps between requests: its sessions, the journal of requests, stored answers."""
