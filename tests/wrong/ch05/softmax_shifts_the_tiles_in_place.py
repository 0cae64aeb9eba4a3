# expect: mutates_argument from check_online_softmax(online_softmax)
patch("torch.exp(scores - m_new)", "scores.sub_(m_new).exp_()")  # .float() of float32 is itself
