"""SCIM 2.0 directory sync per account (issue 30): directories, their users and groups."""
