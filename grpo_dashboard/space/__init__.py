"""A public Hugging Face Space: who may see and do what (access), and deploying the Space."""
