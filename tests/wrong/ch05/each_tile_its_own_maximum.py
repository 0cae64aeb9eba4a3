# expect: missing_rescale from check_online_softmax(online_softmax)
patch("weights = torch.exp(scores - m_new)", "weights = torch.exp(scores - scores.max())")
patch("rescale = torch.exp(m - m_new)", "rescale = 1.0")
