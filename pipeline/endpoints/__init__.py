"""endpoints"""
