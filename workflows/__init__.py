"""resched control side: values -> render -> spec -> lint -> backend dry run -> submit."""
