"""What a person or a script reads: the JSON document, the table, the admin views."""
