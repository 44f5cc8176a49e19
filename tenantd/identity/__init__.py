"""Who the caller is: tokens, passwords, sessions, cookies, guards and their queries."""
