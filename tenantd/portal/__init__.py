"""The admin portal (issue 30 part 4): an owner's single-use link for the customer's IT."""
