"""Logins to the studio: password hashes (`passwords`), the users file (`users_file`), and the limit on failed
logins per user and per client address (`limiter`)."""
