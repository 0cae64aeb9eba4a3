# expect: overflow from check_online_softmax(online_softmax)
patch("m_new = torch.maximum(m, scores.max())", "m_new = torch.tensor(0.0)")  # exp(score) itself
