"""Where the course is published. Change it here, then run `make sync-notebooks`."""

# The repository Colab clones, and the pinned tag it checks out (never a moving branch).
COURSE_REPO = "https://github.com/grpo-course/grpo-course"
COURSE_REF = "v0.1.0"
COLAB_DIR = "/content/grpo-course"
